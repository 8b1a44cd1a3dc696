"""Where ``DeviceStepCollector`` lived before one collector served every env (``middleware.collector``): an
import of it names the new spelling."""
raise ImportError("baton: middleware.device_collector is gone: StepCollector serves torch envs on their device too "
                  "(from middleware import StepCollector)")
