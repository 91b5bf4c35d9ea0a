from workhorse.cli import main

main()
