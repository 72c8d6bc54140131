"""A compile worker process: ``python -m jitnn._compile_worker CACHE_DIR``
(jitnn/compile_pool.py starts them)."""

from jitnn.compile_pool import worker_main

if __name__ == "__main__":
    worker_main()
