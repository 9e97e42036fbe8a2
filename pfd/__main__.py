"""``python -m pfd`` and ``accelerate launch -m pfd`` enter here."""

from pfd.cli import main

if __name__ == "__main__":
    main()
