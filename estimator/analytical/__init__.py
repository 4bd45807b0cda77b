"""The analytical memory model: physics of training memory, each term with its source."""
