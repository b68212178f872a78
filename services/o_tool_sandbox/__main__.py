from o_runtime.service import main
from o_tool_sandbox.service import ToolSandboxService

main(ToolSandboxService)
