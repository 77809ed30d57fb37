"""Autoscaling policies under test, each a small stateful object with `decide(view)`."""

from tokenpilot_lab.fleet.policies.base import FleetPolicy, ScaleChoice
from tokenpilot_lab.fleet.policies.hpa import HpaPolicy
from tokenpilot_lab.fleet.policies.keda import KedaPolicy
from tokenpilot_lab.fleet.policies.kpa import KpaPolicy
from tokenpilot_lab.fleet.policies.static import StaticPolicy

__all__ = ["FleetPolicy", "HpaPolicy", "KedaPolicy", "KpaPolicy", "ScaleChoice", "StaticPolicy"]
