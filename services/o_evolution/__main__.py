from o_evolution.service import EvolutionService
from o_runtime.service import main

main(EvolutionService)
