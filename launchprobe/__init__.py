"""launchprobe: is the GPU computing, reading memory, or waiting for the CPU during LLM decode?"""

__version__ = "0.1.0"
