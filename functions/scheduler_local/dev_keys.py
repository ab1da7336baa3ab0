"""The keys of local mode: derived from the public development secrets, accepted only where local mode is on."""

from scheduler.adapters.dispatch_message import message_key
from scheduler.settings import LOCAL_MESSAGE_SECRET

#: The message key of local mode (the development message secret): the local stack's and the tests'.
LOCAL_MESSAGE_KEY = message_key(LOCAL_MESSAGE_SECRET)
