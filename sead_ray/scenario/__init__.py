"""What a task is: the scenario file (SOP, facts, states, behaviours), the user-state grid, profiles, the turn protocol
that crosses to the engines, the status guards, and the lexicon the rule user hears with (compiled from the scenario
at load time, so its errors name the file's keys).
"""
