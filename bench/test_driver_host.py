"""What the Python benches share: an agent host on libvirt's test driver (its node XML and the
agent.toml every bench writes around its own [api] and further sections) and garm's bootstrap
of a create of image debian-12, flavor small."""
import json

NODE_XML = """<node>
  <cpu><mhz>2000</mhz><model>x86_64</model><nodes>1</nodes><sockets>1</sockets><cores>64</cores><threads>1</threads></cpu>
  <memory>1073741824</memory>
  <pool type='dir'><name>bench-pool</name><target><path>/bench-pool</path></target>
    <volume type='file'><name>base.qcow2</name><capacity unit='GiB'>2</capacity><target><format type='qcow2'/></target></volume>
  </pool>
</node>
"""


def agent_toml(name, directory, capacity="", rest=""):
    """Agent `name` on the test-driver host in `directory` (node.xml there); `capacity`: further
    [capacity] lines; `rest`: its [api] and any further sections."""
    return ('[agent]\nid = "%s"\nstate_dir = "%s/state"\n[capacity]\ncpu_overcommit = 100.0\n%s'
            '[libvirt]\nuri = "test://%s/node.xml"\nstorage_pool = "bench-pool"\n'
            '[[images]]\nname = "debian-12"\nbase_volume = "base.qcow2"\n'
            '[[flavors]]\nname = "small"\nvcpus = 2\nmemory_mib = 2048\ndisk_gib = 20\n%s'
            % (name, directory, capacity, directory, rest))


def bootstrap(name, pool):
    return json.dumps({"name": name, "tools": [], "repo_url": "https://github.com/example",
                       "callback-url": "https://garm.example/api/v1/callbacks",
                       "metadata-url": "https://garm.example/api/v1/metadata",
                       "instance-token": "t", "arch": "amd64", "os_type": "linux",
                       "flavor": "small", "image": "debian-12", "pool_id": pool})
