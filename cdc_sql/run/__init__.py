"""The run: its phases in order, each handed what it needs and returning what it found."""
