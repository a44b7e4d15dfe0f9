"""The ServerApp: builds strategy, model and accountant from config and runs the rounds."""
