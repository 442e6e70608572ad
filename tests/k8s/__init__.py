"""Tests of the Kubernetes side: CRDs, builders, the kopf operator, the chart, the images."""
