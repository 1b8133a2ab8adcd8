"""What the pages compute on a model: attention, induction, interventions, trace, sampling, cost, scaling."""
