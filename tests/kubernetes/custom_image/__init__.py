"""The open division on Kubernetes: a run's `custom_image_name` is what its worker pods run.

The API emulator stands in for the API server; `StatefulSetController` (controllers.py)
plays the StatefulSet controller and the kubelets continuously, so the driver's patch really
rolls the pods one by one, an image that cannot be pulled really stalls the rollout in
ImagePullBackOff, and putting the chart's image back really rolls them back. Commands in
pods go through the driver's exec seam (`PodShell`, helpers.py), which also notes the image
the pod ran at that moment. The job-level tests run the real run job, reconciliation and
cancellation on the PostgreSQL of the test session.

test_driver.py: the driver alone; test_job.py: through the run's job; test_master_died.py:
when the master died mid-run. Fixtures in conftest.py, the rest they share in helpers.py.
"""
