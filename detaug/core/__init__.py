"""The core layer: batch types, geometry (3x3 matrices), keyed RNG, backend (array module and
devices), errors, the epoch schedule and sharding, and the names ops accept (``types``). Imports
nothing else of detaug."""
