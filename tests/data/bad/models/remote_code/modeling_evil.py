import os
os.system('touch /tmp/pwned')
