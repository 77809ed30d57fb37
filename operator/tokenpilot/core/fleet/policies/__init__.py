"""Autoscaling policies under test, each a small stateful object with `decide(view)`."""

from tokenpilot.core.fleet.policies.base import FleetPolicy, ScaleChoice
from tokenpilot.core.fleet.policies.hpa import HpaPolicy
from tokenpilot.core.fleet.policies.keda import KedaPolicy
from tokenpilot.core.fleet.policies.kpa import KpaPolicy
from tokenpilot.core.fleet.policies.static import StaticPolicy

__all__ = ["FleetPolicy", "HpaPolicy", "KedaPolicy", "KpaPolicy", "ScaleChoice", "StaticPolicy"]
