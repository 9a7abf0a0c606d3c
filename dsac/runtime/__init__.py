"""Running a run: the builder, the roles' loops, both runners, the update loop and Trainer."""
