"""End-to-end benchmark of the whole stack (broker, validator, projections, API) under open-loop HTTP load."""
