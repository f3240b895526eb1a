"""Silver: the live source rows after projection, kept by one primary-key MERGE per batch.

A batch for one silver table carries out a window.Window (planner.py chose it): the bronze
changes in (P, U] (and, with the first batch, the snapshot splits' rows, placed at their
watermarks). The statements a batch runs are built once, as a list of `Step`s, from the plan,
the window and a few facts read from the lake (`Facts`: bronze's columns, renames and
TRUNCATEs in the window); `cdc-sql plan` prints that same list. State records P := U only
after the MERGE commits; a rerun of the same window is harmless (docs/architecture.md, "Why
silver is exactly-once").

The modules, in the order data flows (docs/architecture.md, "How a silver batch is built"):
- plan.py: how a pipeline table becomes a silver table (`SilverPlan`), cascade topology;
- facts.py: what a batch reads from the lake's table metadata before its SQL can be written;
- route.py: which way a window goes (the engine's SQL, delta-rs in this process), and why;
- steps.py, sql_text.py: the statements of a batch (pure: `cdc-sql plan` and the golden tests
  import only these, plan.py and facts.py, and need no Spark);
- merge.py: a window carried out, the one place its route is taken;
- execute.py: the steps run on the engine; cascade_rows.py: rows foreign-key cascades changed;
- evolve.py: silver and history created, started and given the source's columns;
- ownership.py: the hand-change check.
"""
