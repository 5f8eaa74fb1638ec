"""Commands named in the host's hints are said as this user types them (views/typed.py)."""

from deploytool.views.typed import Typed

NOTE = "a reboot needs `invoke restart`; `invoke restart --hard` starts over"


def test_the_default_host_of_dot_hosts_yaml_is_typed_bare():
    assert Typed(None, "local").say(NOTE, "local") == NOTE
    assert Typed(None, "local").say(NOTE) == NOTE


def test_another_host_is_named():
    out = Typed(None, "local").say(NOTE, "gpu1")
    assert out == (
        "a reboot needs `invoke restart --host gpu1`; `invoke restart --hard --host gpu1` starts over"
    )


def test_another_hosts_yaml_is_named_the_way_each_program_takes_it():
    out = Typed("/w/try vllm/hosts.yaml", "cpu", "invoke").say(NOTE, "cpu")
    assert out.startswith(
        "a reboot needs `DEPLOYTOOL_CONFIG='/w/try vllm/hosts.yaml' invoke restart`"
    )
    out = Typed("/w/hosts.yaml", "cpu", "deploytool").say("`invoke stop`", "gpu")
    assert out == "`deploytool --config /w/hosts.yaml stop --host gpu`"


def test_a_command_that_names_its_host_is_left_alone():
    text = "`invoke server.status --host <every host of the group>` names it"
    assert Typed(None, "local").say(text, "gpu1") == text
