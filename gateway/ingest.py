"""The one door every adapter calls: dedupe, access, commands, append and enqueue."""
# Interface placeholder; the implementation lands with the core pipeline.
