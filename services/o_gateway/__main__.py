from o_gateway.service import GatewayService
from o_runtime.service import main

main(GatewayService)
