"""Tests of ckpt.state written against its public API.

Run: ``python -m pytest tests/state -q`` (about a minute on a shared 2-core machine).

Helpers
    graph_equal.py      identity-aware structural equality (an isomorphism check), itself
                        tested in test_graph_equal.py and against pickle in test_random_graphs
    models.py, kinds.py savable classes; the table of field kinds with sample values and
                        non-zero defaults, each kind with a plain and a slots holder class
    conftest.py         engine / engine-pair fixtures, round trip, hang watchdog

Behaviour
    test_kinds_matrix   every kind, saved with each engine and loaded with each
    test_default_rule   zero stays zero, default stays default, fresh factory defaults
    test_identity       sharing, cycles, self-reference, distinct equal objects
    test_subtypes       bool/IntEnum/StrEnum/int values in int/str/float fields
    test_fields         nosave, save=/load=, unsavable values, bad field options
    test_hooks          __before_save__, __after_load__, wait ordering and wait cycles
    test_evolution      added, dropped, reordered and re-kinded fields; enums that changed
    test_class_shapes   odd field names, 300 fields, no fields, frozen, kw_only, overrides
    test_safety         unregistered type names in a stream are refused, nothing imported
    test_corruption     truncation, bit flips, hostile values at every position, garbage
    test_deep           100000-long chains (no recursion)
    test_random_graphs  hypothesis graphs through all four engine pairs
    test_stats, test_gc, test_api, test_threads
"""
