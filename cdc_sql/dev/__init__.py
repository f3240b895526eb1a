"""Development tools, not used by a pipeline: a throwaway MariaDB (for the demo and the
tests) and the demo itself."""
