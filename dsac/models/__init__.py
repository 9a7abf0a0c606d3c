"""Networks by name: the built-in MLP and users' custom Keras models."""
