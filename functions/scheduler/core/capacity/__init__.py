"""What is coming and what it needs: the forecast of due occurrences and the workers' pre-scaling."""
