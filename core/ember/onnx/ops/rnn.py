OPS = {}
