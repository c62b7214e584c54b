"""Small plugin modules that tests load through fake entry points."""
