"""Code that runs inside containers: standard library only, no harness imports (each file runs from a flat
folder in the sidecar image, importing its siblings by bare name).

The controller imports none of it but one pure function, :func:`upstream_link.bypass_proxy`: the provenance
a run records (``upstream_proxy``) must be the gateway's own NO_PROXY decision, so both call the same rule
(tests/unit/test_layers.py holds the controller to that one name). It reads ``collect.sh`` as a package
resource and copies the files into the image; the tests import the rest.
"""
