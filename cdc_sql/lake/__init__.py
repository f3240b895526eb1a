"""The lakehouse side: bronze (what arrived), silver (what the source holds), state (the checkpoint)."""
