from .cli import main

main(prog_name="a3fast")
