"""A real-world test corpus: schemas nobody tuned for cdc-sql (a rental-store database with
foreign keys and triggers, written for these tests; generated tables for every charset the
server ships, zero dates in keys, odd names and every type family) and the data to load into
them before the snapshot, after it, and as changes."""
