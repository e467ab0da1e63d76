from prefixbench.cli import main

main()
