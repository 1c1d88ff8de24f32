"""What grading leaves behind, each kind of file written in one place.

:mod:`.gradebook`, nbgrader's database with the course's record of every submission (the one
place grades go); :mod:`.feedback`, each learner's page with the exchange files that let nbgrader
release it; :mod:`.autograded`, the copy formgrader shows the instructor; :mod:`.grade_files`, the
CSV, Gradescope and Canvas files made from the gradebook. Text from a submission is written
through :func:`.escapes.visible`, shown and never acted on. Nothing here grades: these modules
receive results and write them.
"""
