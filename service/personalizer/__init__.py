"""Azure AI Personalizer's API as an adapter over the core use cases (docs/personalizer.md).

The core (:mod:`service.usecases`) knows nothing of Personalizer; this package translates
Personalizer's requests onto it and its answers back, and plugs into the core's seams
(:mod:`service.usecases.learning_settings`) through the app's lifespan
(:mod:`service.api.app`):

=====================  ===============================================================
module                 what it is
=====================  ===============================================================
``routers/``           the routes, error shape and key header of every API version
``schemas``            the pydantic contracts of Personalizer's bodies
``settings``           ``LoopSettings``: a loop's Personalizer settings, typed
``loops``              ``Loops``: rank, reward, activate, configurations
``learning_modes``     Online / Apprentice / LoggingOnly as serving modes of a rank
``loop_rewards``       a reward under ``rewardAggregation`` (``earliest``, ``sum``)
``multislot``          ``MultiSlot``: a multi-slot rank as one event per slot
``vw_arguments``       the learning-policy string: one parser, its table of options
``dsjson``             the Decision Service log format, read into the log's records
``dsjson_export``      logged events written back in that format
``log_commands``       ``bandit import-log`` / ``export-log``: a loop's log in that format
``learning_settings``  ``LoopLearningSettings``: the core's ``LearningSettings``, VW-style
``learning_mode_view`` ``LoopLearningModes``: the core's ``LearningModes`` (the console)
``evaluation_schemas`` the pydantic contracts of Personalizer's evaluations
``evaluation_views``   an evaluation record in each Personalizer version's shape
``deps``               ``LoopsDep``: the process's ``Loops`` for the routers
=====================  ===============================================================
"""
