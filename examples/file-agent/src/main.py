print("the dev toolbox may read src/ and test/")
