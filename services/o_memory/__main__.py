from o_memory.service import MemoryService
from o_runtime.service import main

main(MemoryService)
