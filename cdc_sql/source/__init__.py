"""Everything that talks to MySQL/MariaDB: connections, schema, splits, watermarks, readers, offsets."""
