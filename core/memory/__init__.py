"""Where the memory goes besides the cache: weights by format, exact weight files, engine overhead, the cards."""
