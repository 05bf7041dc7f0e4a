"""tests/conftest.py fails a test that builds a GRPOTrainer without the `trainer`, `slow` or `multiprocess` mark,
so `make test-fast` stays free of trainer builds."""

import pytest
import trl


def test_an_unmarked_test_that_builds_a_trainer_fails_naming_the_mark():
    with pytest.raises(pytest.fail.Exception, match=r"pytest\.mark\.trainer"):
        trl.GRPOTrainer(model="unused: the guard refuses before TRL reads it", reward_funcs=[])


def test_a_marked_test_reaches_trls_own_constructor(request):
    request.applymarker(pytest.mark.trainer)
    # the guard lets the call through: TRL's own __init__ runs and trips over the missing model
    with pytest.raises(AttributeError, match="config"):
        trl.GRPOTrainer(model=None, reward_funcs=[])
