-- the lua toolbox may read this folder (its FileSandbox)
return 1
