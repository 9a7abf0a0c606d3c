"""Running a run: the builder, the roles' loops, the serial runner, the learner's update loop,
evaluation, the preparation before anything starts and the Trainer.
"""
