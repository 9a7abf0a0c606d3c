"""How a run is configured: the config's sections, coercion of values, the checks across settings
and the registry that turns names into code.
"""
