"""One rank of a run, top to bottom (the reference implementation and what every other shares).

entry.py (the one rank-error wrapper), options.py and option_parts.py (the command line),
build.py (the set-up every task takes), trainer.py and progress.py (the loop, the clock, the
goal), recipe.py (schedule and optimizer), comm.py (the process group), metric_sink.py
(where metrics go), checkpoint.py, environment.py (versions and hardware), summary_table.py,
run.py (one reference run: set up, train, summarise). This top level imports no torch:
the TensorFlow implementation shares its torch-free modules (entry, options, config,
errors, progress, recipe, metric_sink, environment, summary_table).
"""
