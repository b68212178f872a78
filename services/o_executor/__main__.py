from o_executor.service import ExecutorService
from o_runtime.service import main

main(ExecutorService)
