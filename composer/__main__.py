from composer.cli import main

main()
