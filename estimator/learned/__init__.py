"""The learned part: corrects the analytical estimate and calibrates its upper bound."""
