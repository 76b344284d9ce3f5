from roofline.cli.main import run

run()
