"""HTTP only: auth, routes, Doris-shaped replies."""
