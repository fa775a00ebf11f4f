from triton_standins.cli import main

main()
