"""A run: options, one preflight, the submission, the run context, the monitor and the stages."""
