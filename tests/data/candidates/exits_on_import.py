"""Test candidate: exits with status 0 while being imported, after printing a fake verdict."""

import os

print('{"status": "passed", "passed": true, "reward": 3}')
os._exit(0)


class ModelNew:
    pass
