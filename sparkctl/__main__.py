from sparkctl.cli import main

main()
