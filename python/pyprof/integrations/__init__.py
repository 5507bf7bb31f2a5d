"""pyprof inside other tools: the pytest plugin, the web middlewares, the
IPython magics and their notebook output."""
