#!/bin/sh
# count-lines FILE: the number of lines of FILE
wc -l < "$1"
