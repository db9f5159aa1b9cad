"""One rank of a run, top to bottom (the reference implementation and what every other shares).

entry.py (the one rank-error wrapper), options.py and option_parts.py (the command line),
build.py (the set-up every task takes), trainer.py and progress.py (the loop, the clock, the
goal), recipe.py (schedule and optimizer), comm.py (the process group), metric_sink.py
(where metrics go), checkpoint.py, environment.py (versions and hardware), summary_table.py, rank_body.py (the
steps of one rank's run, written once for every implementation), run_record.py (the run's
summary, built once from its RunConfig and what it measured), run.py (the reference loop's
and torch-ddp's parts of the rank body). This top level imports no torch: the TensorFlow
and Spark implementations share its torch-free modules (entry, options, config, errors,
progress, recipe, metric_sink, prediction_sink, environment, summary_table, rank_body,
run_record).
"""
