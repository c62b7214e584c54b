"""The adapter interface and the data types adapters receive."""
