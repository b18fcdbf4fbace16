from wemask_cli.cli import main

main()
